-- HOLDER: only the lease holder of a running job writes (extends the lease by extend_s unless '0', sets the
-- pairs). Returns 1 if token holds the lease, 0 if the job has ended (or is gone): nothing left to hold,
-- -1 if it is active under another claim (or none): the lease is lost.
local cur, held_by = unpack(redis.call('HMGET', job, 'status', 'lease_token'))
if cur ~= 'queued' and cur ~= 'running' then return 0 end
if cur ~= 'running' or held_by ~= token then return -1 end
if tonumber(extend_s) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  redis.call('HSET', job, 'lease_until', string.format('%.6f', now + tonumber(extend_s)))
end
for i = fields_from, #ARGV, 2 do redis.call('HSET', job, ARGV[i], ARGV[i + 1]) end
return 1
