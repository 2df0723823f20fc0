-- The locked_until of a claimed message: 9999-12-31 23:59:59.999 UTC, a lease that never ends.
CREATE FUNCTION pgqueue._spark_claimed_until()
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 253402300799999;
