"""Examples on their way to the model: sources in any form, tokenized splits and batches,
and the samplers that mix tasks."""
