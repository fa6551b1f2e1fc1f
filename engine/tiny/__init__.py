"""The tiny model builders `engine/models.py` runs, one module per model, and what they share
(`common`). They run in the engine's venv (torch, transformers, tokenizers, mistral-common) and
import nothing of the project but each other."""
