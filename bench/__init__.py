"""bench/: audio-gateway side by side with the alternatives a user has (issue 5).

Run `python -m bench --help`; see bench/README.md.
"""
