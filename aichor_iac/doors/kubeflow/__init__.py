"""Kubeflow's v1 training operator's jobs (PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob)
and the MPI operator's MPIJob."""
