"""Generated gRPC stubs for gradtape.v1 (tape_service_pb2, tape_service_pb2_grpc).

Written here by setup.py from proto/gradtape/v1/tape_service.proto when the
package is built; never committed.
"""
