# The UCX control plane, built straight from runtime/job/control.c so that it is tested on its own,
# whatever state the rest of runtime/ is in. 5 ranks: one compute rank and four optimizers,
# oversubscribed on purpose (CI has 2 cores): idle ranks must sleep, not spin.
add_executable(test_control ${MT_TEST_DIR}/test_control.c ${CMAKE_SOURCE_DIR}/runtime/job/control.c)
target_link_libraries(test_control PRIVATE MPI::MPI_C PkgConfig::UCX)
# --allow-run-as-root is needed by Open MPI only under root and harmless otherwise.
set(MT_CONTROL_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 5)
# On one node UCX picks shared memory; control_tcp forces the TCP transport that stands in for
# the network across nodes (socket wake-ups, endpoint closes that take a round of progress).
add_test(NAME control COMMAND ${MT_CONTROL_MPIRUN} $<TARGET_FILE:test_control>)
add_test(NAME control_tcp COMMAND ${MT_CONTROL_MPIRUN} -x UCX_TLS=tcp $<TARGET_FILE:test_control>)
set_tests_properties(control control_tcp PROPERTIES TIMEOUT 180)
