"""What audio a request names, as pure rules: no I/O.

Holds the sidechannel's keys and forms (`sidechannel`), chat content parts naming a path
(`content_parts`) and what their URLs name (`urls`), object URLs and prefixes
(`object_names`), container formats by extension and content (`formats`), and strict base64
checked and hashed piece by piece (`strict_base64`).
May import: `gateway.errors` only. Everything else may import it.
"""
