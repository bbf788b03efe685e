"""Records: the batch container and the CommitLog walk/resync, the single-record decoder, msgIds,
the record encoder."""
