"""One rewritten request, from the client's body to the body that goes upstream.

`pipeline` is the orchestrator: parse -> sidechannel and path parts -> clips -> splice -> body.
`loading` loads a request's clips (paths checked by kind, [normalize], cache); `speech` builds
the speech-to-text routes' multipart upload from the same clips.

May import: every room below the top (`naming`, `audio`, `clips`, `normalize`, `chunking`,
`references`, `affinity`, `splice`, `upstream`, the ground). The top (`app`) and the dataset
tools (`tools`) import it.
"""
