"""`python -m gateway.stub_upstream --port 8000`."""

from .app import main

main()
