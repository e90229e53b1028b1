"""The training recipe and what it needs: optimization, distributed training, resuming a
run, and the Hugging Face Trainer backend."""
