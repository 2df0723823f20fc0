# pgqueue: PGXS build. `make install` installs into the server pg_config names;
# `make installcheck` runs the pg_regress suite (sql/, expected/) and the
# isolation specs (specs/) against a running server (PGHOST, PGPORT, PGUSER).
EXTENSION  = pgqueue
EXTVERSION = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)
DATA       = $(sort $(wildcard extension/$(EXTENSION)--*.sql))

REGRESS      = 00_install
REGRESS_OPTS = --inputdir=. --load-extension=$(EXTENSION)
ISOLATION      =
ISOLATION_OPTS = --inputdir=. --load-extension=$(EXTENSION)

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: version
version:
	@echo $(EXTVERSION)
