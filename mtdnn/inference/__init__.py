"""Using a trained model: batched prediction, the in-memory Predictor, scoring files, and
the Hugging Face export."""
