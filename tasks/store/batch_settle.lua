-- BATCH_SETTLE: lines' answers into the output (or error) list and its count, each once: only a line still in
-- flight is written (a second settle of the same line, by a feeder that died after the first, finds it gone and
-- writes nothing), and only by the lease's holder. Entries: job id -> answer line. Returns how many were written.
if redis.call('GET', lease) ~= token then return -1 end
local written = 0
for i = entries_from, #ARGV, 2 do
  if redis.call('HDEL', flight, ARGV[i]) == 1 then
    redis.call('RPUSH', answers, ARGV[i + 1])
    written = written + 1
  end
end
if written > 0 then
  redis.call('HINCRBY', state, counter, written)
  redis.call('EXPIRE', answers, ttl_s)
  redis.call('PUBLISH', changed, '1')
end
return written
