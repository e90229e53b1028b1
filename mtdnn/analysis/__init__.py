"""Reading results: statistics, the paper's tables, plots, agreement with human labels,
and the SMART probe."""
