"""`python -m bench.forgetting`: the gateway by reference in front of layouts that forget clips
(the stub as several vLLM API servers, and with its processor cache off), waves of 16 seeds:
misses, refusals and upstream requests per client request wave by wave, and the misses after the
gateway switched the model to data, per clip. Writes no results file: it prints the table
(Markdown) and the figures (JSON, on stderr).

May import: bench/shared/ and the gateway's stub (as a subprocess). Never another room of bench/.
"""
