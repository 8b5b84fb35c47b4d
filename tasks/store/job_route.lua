-- ROUTE: route() for count jobs of one model (the orphan sweeper's re-sends), on one clock reading: each pick
-- counts against its holder's capacity for the next, as ADMIT_MANY's do. Returns the queue of each, in order.
--#include time
--#include queue_route_fn
local queues = {}
for i = 1, tonumber(count) do queues[i] = route() end
return queues
