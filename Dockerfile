# Worker image for running `xlnet preprocess` on Google Cloud Dataflow (and on Flink/Spark
# through Beam's portable runner): the Beam Python SDK image of the pinned Beam version plus
# this package and its pinned dependencies.
#
# Why an image: TensorFlow 2.21 ships manylinux_2_27 wheels only, while Dataflow's
# --requirements_file staging downloads manylinux_2_28 wheels, so staging dependencies at
# job start is not dependable. Build once, push, and pass --sdk_container_image:
#
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/xlnet-worker:0.1.0 .
#   docker push REGION-docker.pkg.dev/PROJECT/REPO/xlnet-worker:0.1.0
#   xlnet preprocess ... --runner DataflowRunner --project PROJECT --region REGION \
#       --temp_location gs://BUCKET/tmp \
#       --sdk_container_image REGION-docker.pkg.dev/PROJECT/REPO/xlnet-worker:0.1.0
#
# The launching machine must run the same Python minor version (3.11) and Beam version.
FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /opt/xlnet
COPY setup.py xlnet_cli.py ./
COPY pipeline ./pipeline
COPY tfrecords ./tfrecords
COPY trainer ./trainer
# Same pins as setup.py (Beam 2.77.0 is already in the base image and stays as is).
# The dask extra too, so that the same image runs Dask workers: docker run --entrypoint dask IMAGE worker ADDRESS
RUN pip install --no-cache-dir "/opt/xlnet[tensorflow,pipeline,dask]" \
    && python -c "import apache_beam, sentencepiece, pipeline.beam_pipeline; assert apache_beam.__version__ == '2.77.0'"

# The SDK harness boot program of the base image starts the worker.
ENTRYPOINT ["/opt/apache/beam/boot"]
