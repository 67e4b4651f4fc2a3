// A second translation unit that includes conveyor: its definitions must link once.
#include <conveyor/conveyor.hpp>

std::size_t consumer_second_lanes(conveyor::runtime& rt) { return rt.io_lanes(); }
