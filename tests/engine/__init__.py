"""The end-to-end suite through the gateway to a real vLLM engine (see conftest.py)."""
