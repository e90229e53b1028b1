"""Code shipped inside exported models (see :mod:`mtdnn.export`): self-contained, it
imports only torch and transformers."""
