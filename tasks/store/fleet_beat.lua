-- A worker's heartbeat, stamped on Redis' clock, and the count of messages it holds.
--#include time
redis.call('ZADD', workers, now, worker)
redis.call('HSET', held_counts, worker, held)
