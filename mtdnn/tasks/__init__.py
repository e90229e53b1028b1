"""What a task is: its definition, its type's behaviour, the rows it reads and its metrics."""
