"""placeholder"""
def require() -> None:
    pass
def writer():
    raise NotImplementedError
