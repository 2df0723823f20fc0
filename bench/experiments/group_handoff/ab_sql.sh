#!/usr/bin/env bash
# Sourced by ab_rev.sh and ab_keepup.sh: ab_sql ROOT REV DIR FUNCTION... writes DIR/A.sql (the
# functions of extension/src/functions/messages as at git revision REV) and DIR/B.sql (as in the
# tree at ROOT), each as CREATE OR REPLACE without its COMMENT, to install in turn over the
# tree's extension.
ab_sql() {
  local root=$1 rev=$2 dir=$3 f file
  shift 3
  for f in "$@"; do
    file=extension/src/functions/messages/$f.sql
    git -C "$root" show "$rev:$file" | _ab_as_replace >> "$dir/A.sql"
    _ab_as_replace < "$root/$file" >> "$dir/B.sql"
  done
}
_ab_as_replace() { sed '/^COMMENT ON/,$d' | sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/'; echo ";"; }
