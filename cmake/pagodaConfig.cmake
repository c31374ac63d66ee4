# find_package(pagoda): the installed libraries, with the packages their headers need.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(nlohmann_json 3)
include(${CMAKE_CURRENT_LIST_DIR}/pagodaTargets.cmake)
