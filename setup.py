"""Packaging for the XLNet system: Beam preprocessing, training on TensorFlow or JAX, import and export.

The base install is what every part shares (Keras, SentencePiece, NumPy, safetensors) and no
framework: the ``tensorflow`` extra adds TensorFlow for the TensorFlow trainer, fine-tuning,
SavedModel export and serving (``pip install "xlnet-pretrain[tensorflow]"``); the ``jax`` extra,
JAX with the JAX engine's reader (CRC checks) and Orbax checkpoints, without TensorFlow, for a GPU
machine or TPU VM that runs JAX only. `xlnet vocab` and `xlnet preprocess` need the ``pipeline``
extra (Apache Beam; no TensorFlow); running it on a Dask cluster, the ``dask`` extra (on the
launcher and on every worker). The ``interop`` extra adds PyTorch and Hugging Face transformers, only
for the interop tests (import and export need neither).
"""
from setuptools import find_packages, setup

# Pinned so that preprocessing and training produce identical bytes and losses across
# machines; the Dataflow worker image (Dockerfile) installs the same set.
INSTALL_REQUIRES = [
    "keras>=3.12,<4",
    "sentencepiece==0.2.3",
    "numpy>=1.26",
    # Hugging Face checkpoints (model.safetensors) read and written with its NumPy API, no torch.
    "safetensors>=0.4.3",
    # TFRecord framing checksums: the records read without TensorFlow (tfrecords/record_files.py) and
    # the TensorBoard event files both training engines write (trainer/runtime/event_records.py).
    "google-crc32c>=1.5",
]
# The TensorFlow trainer, fine-tuning, SavedModel export and serving.
TENSORFLOW_REQUIRES = [
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "tensorboard==2.21.0",  # tf.summary writers of the training loop
]
# py3langid: `xlnet preprocess --languages` (pipeline/language_id.py); its model ships inside the wheel (4.6 MB,
# NumPy only), so identification needs no download. Preprocessing only: the base install and `jax` stay free of it.
PIPELINE_REQUIRES = ["apache-beam[gcp,tfrecord]==2.77.0", "py3langid==0.4.0"]
# `xlnet preprocess --runner dask`: Dask's distributed scheduler, at the versions apache-beam 2.77's own
# `dask` extra declares (dask>=2024.4.2, distributed>=2024.4.2). The launcher and every worker need it.
DASK_REQUIRES = ["dask[distributed]>=2024.4.2"]
# The network on JAX (issue 37: the same network and pretraining step under KERAS_BACKEND=jax); the
# CPU build here, the GPU machines carry their own jax with CUDA. The test extra holds it for the
# backend tests. orbax-checkpoint: the JAX
# engine's checkpoints (trainer/runtime/orbax_checkpoints.py), Orbax's CheckpointManager as MaxText's.
JAX_REQUIRES = ["jax[cpu]>=0.10", "orbax-checkpoint>=0.12.8"]
TEST_REQUIRES = [
    "pytest>=8",
    # `make test` runs the default suite on two processes (-n 2): most tests hold one core.
    "pytest-xdist>=3.8",
    # A Cloud Storage JSON API in memory, for the gs:// tests (tests/support/gcs_emulator.py).
    "gcp-storage-emulator==2026.7.19",
]
# The real Hugging Face client for the interop tests (`make test-interop`, its own .venv-interop).
# torch is the CPU build; install it before this extra (the Makefile does), since a plain
# `torch` from the index resolves to several GB of CUDA packages.
INTEROP_REQUIRES = ["torch==2.13.0", "transformers==5.23.0"]

setup(
    name="xlnet-pretrain",
    version="0.1.0",
    description="XLNet pretraining: Apache Beam preprocessing, tf.distribute training, SavedModel export",
    # Every package and subpackage of the three (tests/test_packaging.py checks the wheel holds them all).
    packages=find_packages(include=["pipeline", "pipeline.*", "tfrecords", "tfrecords.*", "trainer", "trainer.*"]),
    py_modules=["xlnet_cli"],
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require={"pipeline": PIPELINE_REQUIRES, "dask": PIPELINE_REQUIRES + DASK_REQUIRES,
                    "test": TENSORFLOW_REQUIRES + PIPELINE_REQUIRES + DASK_REQUIRES + JAX_REQUIRES + TEST_REQUIRES,
                    "tensorflow": TENSORFLOW_REQUIRES, "jax": JAX_REQUIRES,
                    "plot": ["matplotlib>=3.8"], "interop": INTEROP_REQUIRES},
    entry_points={"console_scripts": ["xlnet=xlnet_cli:main"]},
)
