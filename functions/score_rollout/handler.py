def lambda_handler(event, context):
    raise NotImplementedError
