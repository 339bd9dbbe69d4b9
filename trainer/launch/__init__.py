"""The one way in: a run described by typed settings (``PretrainingRun``, ``FinetuningRun``), its
configurations resolved and its controller built, as the Model Garden's ``train_lib`` does.

`xlnet train`, `xlnet finetune`, `xlnet plan`, `xlnet inspect` and the benchmarks all come through
here; the commands only turn flags into these settings.
"""
