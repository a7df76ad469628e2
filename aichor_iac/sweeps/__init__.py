"""A sweep, whichever door it comes in by (Katib's Experiment, Trainer's OptimizationJob, the
SDK's `optimize`): its search space and algorithms, the samplers that learn, early stopping,
trial names, its results and their picture. The doors read a sweep with these; none imports
another door for it."""
