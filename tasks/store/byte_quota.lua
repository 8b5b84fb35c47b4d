-- BYTE_QUOTA: take or give back one entry of an owner's live bytes (byte_quota_fn.lua says how).
-- Returns {1 or 0, bytes held after}.
--#include byte_quota_fn
local ok, held = quota_take(ledger, sizes, entry, tonumber(bytes), tonumber(ttl_s), tonumber(limit))
return {ok, held}
