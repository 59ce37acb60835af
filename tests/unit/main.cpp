// The Catch2 main, in its own translation unit so test files recompile fast.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
