"""The dataset commands, `audio-gateway check` and `audio-gateway convert`.

They read JSONL rows and hold each row's request to the server's own rules by calling the
server's modules (sidechannel, path policy, sniffing, durations, splice, the rewrite pipeline),
never a copy of them:

    rows.py      pure: where a row's request is (NeMo Gym, chat, Responses)
    jsonl.py     streaming lines in, atomic files out
    progress.py  the stderr progress bar
    results.py   plain records: a row's error, a checked row and its clips
    check.py     one row checked as `serve` would check it
    summary.py   what check and convert report (table or JSON)
    inline.py    pure: the inline clips of a request, and the request with them as paths
    blobs.py     clip files named by their sha256, written once and atomically
    prefix.py    pure: a request's sidechannel renamed under another key prefix
    converters.py  what each row becomes: --extract-to, --inline, --to-key-prefix
    convert.py   `audio-gateway convert`: the run, the atomic output file
    cli.py       argv -> the commands -> exit status

May import: any room below the app (`naming`, `audio`, `splice`, `request`, `models`,
`chunking`, `bridge`, `references`, `upstream`, `serving` (the `--log-level` option),
`config`). Only `__main__` imports it.
"""
