"""The data contract between preprocessing and training: schema, manifest, writer, reader."""
