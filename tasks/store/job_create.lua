-- CREATE: the record, without a queue reservation. Returns created_at.
--#include job_create_fn
return create()
