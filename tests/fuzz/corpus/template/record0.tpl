confkv-template 1
name fz
created_ms 1700000000000
bytes 0
xxh64 ef46db3751d8e999

