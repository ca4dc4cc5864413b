"""The Files API (and, as it comes, the Batch API): routes over the store of interlingua/batches."""
