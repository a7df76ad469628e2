"""Every run kept (issue 66): its record, one typed and versioned read model (`model`), kept in
the user's data directory (`store`), and read back as a cluster is read once its pods are gone
(`reader`). Written by what sees a run (the local driver, `run --local`), read by `observe`."""
