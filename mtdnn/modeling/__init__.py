"""The model: a shared encoder with one head per task, SMART's regularisers, the training
objective, gradient surgery and numeric precision."""
