"""Raw official GLUE / SNLI / SciTail files → canonical JSONL, plus nested subsets."""
