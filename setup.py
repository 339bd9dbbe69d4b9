"""Packaging for the XLNet pretraining system: Beam preprocessing, TF training, export."""
from setuptools import setup

# Pinned so that preprocessing and training produce identical bytes and losses across
# machines; the Dataflow worker image (Dockerfile) installs the same set.
INSTALL_REQUIRES = [
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "tensorboard==2.21.0",  # tf.summary writers of the training loop
    "keras>=3.12,<4",
    "apache-beam[gcp,tfrecord]==2.77.0",
    "sentencepiece==0.2.3",
    "numpy>=1.26",
]

setup(
    name="xlnet-pretrain",
    version="0.1.0",
    description="XLNet pretraining: Apache Beam preprocessing, tf.distribute training, SavedModel export",
    packages=["pipeline", "tfrecords", "trainer"],
    py_modules=["xlnet_cli"],
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require={"test": ["pytest>=8"], "plot": ["matplotlib>=3.8"]},
    entry_points={"console_scripts": ["xlnet=xlnet_cli:main"]},
)
