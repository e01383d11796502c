"""The results dataset: record schemas, the Parquet store, the incremental writer and the runs rows."""
