"""`python -m bench.s3_libraries --moto-python PYTHON`: obstore against aiobotocore on a local
moto server.

Measures GET/HEAD throughput and the client's CPU per request and per MB. Prints Markdown;
writes no results file. Not part of `python -m bench`.

May import: bench/shared/.
"""
