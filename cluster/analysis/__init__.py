"""Analysis over the dataset: metrics, the correctness gate, statistics, compare, query, report and plots."""
