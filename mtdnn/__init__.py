"""mtdnn: multi-task fine-tuning of pre-trained encoders with SMART."""

__version__ = "0.1.0"
