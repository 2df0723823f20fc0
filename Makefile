# pgqueue: PGXS build. `make install` installs into the server pg_config names;
# `make installcheck` runs the pg_regress suite (sql/, expected/) and the
# isolation specs (specs/) against a running server (PGHOST, PGPORT, PGUSER).
EXTENSION  = pgqueue
EXTVERSION = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)
DATA       = $(sort $(wildcard extension/$(EXTENSION)--*.sql))

REGRESS      = 00_install 10_queue 20_create 30_dequeue 40_lease 50_dead_letter 60_notify 70_errors 80_spark
REGRESS_OPTS = --inputdir=. --load-extension=$(EXTENSION)
ISOLATION      = consumers complete_expiry heartbeat_expiry defer_complete drop_dequeue drop_deadlock backpressure batch_dequeue notify
ISOLATION_OPTS = --inputdir=. --load-extension=$(EXTENSION)

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: version
version:
	@echo $(EXTVERSION)
