"""Code shipped inside exported models (see :mod:`mtdnn.inference.export`): self-contained, it
imports only torch and transformers."""
