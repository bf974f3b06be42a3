"""The planner's input: the request schema (schema.py, pydantic), its errors as SpecError
naming the field (errors.py), and validated request blocks -> the cost model's frozen specs
(parse.py). The REST routes and the CLI validate a request here once; the facade
(planner/service.py) takes the validated model."""
