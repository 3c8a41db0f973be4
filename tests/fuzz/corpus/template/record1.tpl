confkv-template 1
name fz
created_ms 1700000000001
bytes 31
xxh64 5f539be9ebf44b62

You are a helpful storyteller.
