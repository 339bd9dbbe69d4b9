"""Planning a run before it starts: the named devices, the analytic memory model, the FLOPs and
step-time model, and the plan of a configuration on a device (`xlnet plan`, the fit check of
`xlnet train` and `xlnet finetune`)."""
