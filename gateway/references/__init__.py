"""What vLLM holds: clips sent by uuid (`repeats = "reference"`) and the relay that retries a miss.

Holds the record of held clips (`held`), bodies that can go by reference or with data (`body`),
and the reference relay (`relay`). May import: `upstream`, `bridge`, `audio`, `splice`, `metrics`.
"""
