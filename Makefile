# pgqueue: PGXS build.
#
#   make                 build/pgqueue--$(EXTVERSION).sql, the full install script of the current
#                        version, from extension/src/ (one file per function, see below), and the
#                        plain SQL scripts in python/pgqueue/sql/ (install without extension files)
#   make install         install the extension into the server that pg_config names
#   make installcheck    the pg_regress suite (sql/, expected/) and the isolation specs (specs/)
#                        against a running server (PGHOST, PGPORT, PGUSER)
#
# extension/src/ is the source of the current version: schema.sql (the install-time schema
# check), tables/, dump.sql (pg_dump registration, extension only), functions/<kind>/<name>.sql,
# views/, triggers/, data/, privileges/ (what must run once every object is made). Released
# scripts in extension/ (pgqueue--0.1.sql and the upgrade deltas pgqueue--A--B.sql) are frozen;
# the delta to the current version is written by hand and tests/test_upgrade.py proves it gives
# the same catalog as the full script built here (as installed: the tests refuse to start when
# the installed files are not this build, tests/conftest.py).
EXTENSION  = pgqueue
EXTVERSION = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)

SRC_TABLES = $(sort $(wildcard extension/src/tables/*.sql))
# time/ first: other functions' SQL-standard bodies call them (bound at CREATE); within time/,
# _write_clock calls now_ms, so now_ms comes first.
SRC_TIME   = extension/src/functions/time/now_ms.sql \
             $(filter-out %/now_ms.sql,$(sort $(wildcard extension/src/functions/time/*.sql)))
SRC_FUNCS  = $(SRC_TIME) $(filter-out $(SRC_TIME),$(sort $(wildcard extension/src/functions/*/*.sql)))
SRC_REST   = $(sort $(wildcard extension/src/views/*.sql)) \
             $(sort $(wildcard extension/src/triggers/*.sql)) \
             $(sort $(wildcard extension/src/data/*.sql)) \
             $(sort $(wildcard extension/src/privileges/*.sql))
SRC        = extension/src/schema.sql $(SRC_TABLES) extension/src/dump.sql $(SRC_FUNCS) $(SRC_REST)
SRC_PLAIN  = extension/src/schema.sql $(SRC_TABLES) $(SRC_FUNCS) $(SRC_REST)

FULL       = build/$(EXTENSION)--$(EXTVERSION).sql
RELEASED   = $(sort $(wildcard extension/$(EXTENSION)--*.sql))
DATA       = $(RELEASED)
DATA_built = $(FULL)

# Plain SQL install: the same SQL without the extension-only parts (\echo guard,
# pg_extension_config_dump), after CREATE SCHEMA and before the version record.
PLAIN_DIR   = python/pgqueue/sql
PLAIN_FULL  = $(PLAIN_DIR)/pgqueue--$(EXTVERSION).sql
PLAIN       = $(PLAIN_FULL) $(patsubst extension/%,$(PLAIN_DIR)/%,$(RELEASED))
EXTENSION_ONLY = '/^\\echo /d; /pg_catalog\.pg_extension_config_dump(/d'

REGRESS      = 10_queue 20_create 30_dequeue 40_lease 50_dead_letter 60_notify 70_errors 80_spark 90_groups
REGRESS_OPTS = --inputdir=. --load-extension=$(EXTENSION)
ISOLATION      = consumers complete_expiry heartbeat_expiry cancel_lock_order cancel_group_lock_order defer_complete drop_dequeue drop_deadlock backpressure batch_dequeue notify \
                 rr_orphans rr_backpressure capped_mixed alter_deadlock complete_batch_expiry hint_pitfalls group_hint_pitfalls group_wait_floor \
                 group_order group_producer idempotent_create rr_key_window rr_queue_create rr_lease_token \
                 schedule_drop rr_group_producer rr_group_order spark_publish_retry dead_requeue_purge group_alter \
                 reserve_wait_drop idempotent_window create_stripe skip_fast schedule_skip queue_recreated
ISOLATION_OPTS = --inputdir=. --load-extension=$(EXTENSION)
EXTRA_CLEAN    = build $(PLAIN)

all: $(FULL) $(PLAIN)

$(FULL): $(SRC) $(EXTENSION).control
	@mkdir -p $(dir $@)
	@echo "building $@ from extension/src"
	@{ printf '%s\n' '\echo Use "CREATE EXTENSION $(EXTENSION)" to load this file. \quit'; \
	  echo '-- pgqueue $(EXTVERSION), built from extension/src by make: edit the sources, not this file.'; \
	  for f in $(SRC); do echo; echo "-- $$f"; cat $$f; done; } > $@

# Every plain script is one statement: plain/open.sql and plain/close.sql wrap it in a DO block
# that EXECUTEs the rest, so that it commits whole or not at all however it is run (psql without
# -1 or ON_ERROR_STOP ran it statement by statement). The SQL inside must not hold the DO's
# quote tags ($(PLAIN_TAGS)); make refuses to build it if it does.
PLAIN_WRAP = extension/src/plain/open.sql extension/src/plain/close.sql
PLAIN_TAGS = $$pgqueue_script$$ or $$pgqueue_plain$$
define plain_wrap
	@if grep -q -e '$$pgqueue_script\$$' -e '$$pgqueue_plain\$$' $@.body; then \
	  echo "$@: the SQL holds a quote tag of plain/open.sql" >&2; rm -f $@.body; exit 1; fi
	@cat extension/src/plain/open.sql $@.body extension/src/plain/close.sql > $@
	@rm -f $@.body
endef

$(PLAIN_FULL): $(SRC_PLAIN) extension/src/plain/guard.sql extension/src/plain/begin.sql extension/src/plain/end.sql $(PLAIN_WRAP) $(EXTENSION).control
	@mkdir -p $(dir $@)
	@echo "building $@ from extension/src"
	@{ cat extension/src/plain/guard.sql extension/src/plain/begin.sql; \
	  for f in $(SRC_PLAIN); do echo; echo "-- $$f"; cat $$f; done; \
	  sed 's/@VERSION@/$(EXTVERSION)/' extension/src/plain/end.sql; } > $@.body
	$(plain_wrap)

# A released script, plain: a full script (pgqueue--X.sql) gets the schema and the version
# record around it, an upgrade delta (pgqueue--A--B.sql) the schema check (releases before 0.4
# had none) and the check that the database holds A before it and the version update after it;
# each starts with the guard (plain/guard.sql: the search_path pin, and the marker the version
# record needs), and each is wrapped in one DO block like the full script.
PLAIN_PARTS = extension/src/plain/guard.sql extension/src/plain/begin.sql extension/src/plain/step.sql \
              extension/src/plain/step_end.sql extension/src/plain/end.sql
$(PLAIN_DIR)/$(EXTENSION)--%.sql: extension/$(EXTENSION)--%.sql $(PLAIN_PARTS) $(PLAIN_WRAP) extension/src/schema.sql
	@mkdir -p $(dir $@)
	@v='$*'; case "$$v" in \
	  *--*) { cat extension/src/plain/guard.sql extension/src/schema.sql; \
	          sed "s/@FROM@/$${v%%--*}/g; s/@TO@/$${v##*--}/g" extension/src/plain/step.sql; \
	          sed $(EXTENSION_ONLY) $<; \
	          sed "s/@FROM@/$${v%%--*}/g; s/@TO@/$${v##*--}/g" extension/src/plain/step_end.sql; } ;; \
	  *)    { cat extension/src/plain/guard.sql extension/src/plain/begin.sql; sed $(EXTENSION_ONLY) $<; \
	          sed "s/@VERSION@/$$v/" extension/src/plain/end.sql; } ;; \
	esac > $@.body
	$(plain_wrap)

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: version
version:
	@echo $(EXTVERSION)
