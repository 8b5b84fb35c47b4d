-- UPLOAD_WRITE: an upload's metadata, its tombstone, its bytes counted against its owner's quota and, with an
-- Idempotency-Key, the key's binding: all or nothing, so a lost reply leaves one of two states, never a half.
-- Fenced at not_after on Redis' clock: run later (after a stall) it writes nothing, so a GET soon settles it.
-- Returns {'late'} (nothing written), {'replay', id} (the key names a live upload of this body: nothing
-- written), {'conflict', id} (of another body), {'over', held} (past the quota: nothing written), {'ok', held}.
--#include byte_quota_fn
if not_after ~= '' and now > tonumber(not_after) then return {'late'} end
if binding ~= '' then
  local bound = redis.call('GET', binding)
  local id, found = string.match(bound or '', '^(%S+) (%S+)$')
  -- A binding whose upload expired or was deleted names nothing: this upload takes the key.
  if id and redis.call('EXISTS', upload_prefix .. id) == 1 then
    if found == digest then return {'replay', id} end
    return {'conflict', id}
  end
end
local ttl = tonumber(ttl_s)
local ok, held = quota_take(ledger, sizes, entry, tonumber(bytes), ttl, tonumber(limit))
if ok == 0 then return {'over', held} end
local expiry = math.max(1, math.ceil(ttl))
redis.call('SET', meta, value, 'EX', expiry)
redis.call('SET', tombstone, owner, 'EX', expiry + tonumber(tombstone_ttl))
if binding ~= '' then redis.call('SET', binding, upload_id .. ' ' .. digest, 'EX', expiry) end
return {'ok', held}
