"""`python -m bench.smg`: the gateway by reference, with the clip key, in front of SMG (smg
1.13.0, its venv: `.ci/smg/install`) and two stub replicas, over waves of 16 seeds of the same
clips: upstream requests per client request and the references' misses, wave by wave, with SMG
started with the guide's recommended flags and with its defaults. Writes
bench/results/<date>-smg.json and .md (the name is `--name`, smg by default).

May import: bench/shared/, engine/ (engine/smg.py starts SMG) and the gateway's stub (as a
subprocess). Never another room of bench/.
"""
