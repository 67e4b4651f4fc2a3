// placeholder: replaced by the test file for s3/config
