"""What the gateway knows of the model a request goes to: its profile.

profile.py  pure: `ModelProfile` (window, longest clip heard whole, clips per prompt, rate,
            stereo, uuid-only parts, routes) and `resolve`: a profile with an operator's
            `[models."<name>"]` overrides merged over it
builtin.py  pure: the built-in profiles, keyed by the HF `architectures` name
limits.py   pure: a model's clips-per-prompt limit (the 400 before any clip is read), and
            `[chunking]` as it cuts the model's clips
known.py    pure: where an architecture is found without asking the operator: a model
            directory's config.json / params.json, a known repo id, vLLM's /v1/models cards
placement.py  `Placement`: each served model name's profile, from the config or found
            (cached, bounded, never holding a request long nor failing it)

May import: `config`, `errors`. The request path (`request`) and the top (`app`) import it; the
upstream's /v1/models is fetched by a callable the top hands in.
"""
