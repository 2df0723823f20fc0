-- Ceiling: the cheapest round trip.
SELECT 1;
