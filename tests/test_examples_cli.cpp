// The example programs' command lines: strict flag parsing with messages that name the flag,
// output paths checked before training, corrupt data files and every other failure reported as
// a message and a non-zero exit (never an abort). Runs the built fashion_mlp, fashion_rnn and
// fashion_cnn.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Result {
  int code = -1;  // exit status; 128 + signal when killed by one
  std::string out, err;
};

// Runs `cmd` through the shell with stdout and stderr captured in files.
Result run(const std::string& cmd) {
  const fs::path dir = fs::temp_directory_path() / ("ktape_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string o = (dir / "out").string(), e = (dir / "err").string();
  const int st = std::system((cmd + " >" + o + " 2>" + e).c_str());
  Result r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  r.out = slurp(o);
  r.err = slurp(e);
  fs::remove_all(dir);
  return r;
}

const std::string kMlp = KTAPE_FASHION_MLP;
const std::string kRnn = KTAPE_FASHION_RNN;
const std::string kCnn = KTAPE_FASHION_CNN;

void expect_usage_error(const std::string& prog, const std::string& args, const std::string& msg) {
  SCOPED_TRACE(prog + " " + args);
  const Result r = run(prog + " " + args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(msg), std::string::npos) << "stderr: " << r.err << "\nwant: " << msg;
  EXPECT_NE(r.err.find("usage:"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace

TEST(ExamplesCli, NumbersAreParsedStrictlyAndErrorsNameTheFlag) {
  expect_usage_error(kMlp, "--epochs 1abc", "--epochs: '1abc' is not an integer");
  expect_usage_error(kMlp, "--lr 0.001xyz", "--lr: '0.001xyz' is not a number");
  expect_usage_error(kMlp, "--lr inf", "--lr: 'inf' must be a finite number > 0");
  expect_usage_error(kMlp, "--lr nan", "--lr: 'nan' must be a finite number > 0");
  expect_usage_error(kMlp, "--lr 0", "--lr: '0' must be a finite number > 0");
  expect_usage_error(kMlp, "--seed -1", "--seed: '-1' must be a non-negative integer");
  expect_usage_error(kMlp, "--seed 99999999999999999999",
                     "--seed: '99999999999999999999' is out of range");
  expect_usage_error(kMlp, "--epochs 99999999999",
                     "--epochs: '99999999999' must be an integer in [0, 2147483647]");
  expect_usage_error(kMlp, "--epochs -1", "--epochs: '-1' must be an integer in [0, ");
  expect_usage_error(kMlp, "--batch-size 0", "--batch-size: '0' must be an integer in [1, ");
  expect_usage_error(kMlp, "--dropout 1", "--dropout: '1' must be a finite number >= 0 and < 1");
  expect_usage_error(kMlp, "--limit 0", "--limit: '0' must be an integer in [1, ");
  expect_usage_error(kMlp, "--optimizer adamw", "--optimizer: 'adamw' is not one of sgd");
  expect_usage_error(kMlp, "--epochs", "--epochs");
  expect_usage_error(kMlp, "--frobnicate 3", "--frobnicate");
  expect_usage_error(kMlp, "--epochs 1 --epochs 2", "--epochs");
  expect_usage_error(kRnn, "--hidden 0", "--hidden: '0' must be an integer in [1, ");
  expect_usage_error(kRnn, "--cell rnn", "--cell: 'rnn' is not one of lstm, gru");
  expect_usage_error(kRnn, "--clipnorm -1", "--clipnorm: '-1' must be a finite number > 0");
  expect_usage_error(kRnn, "--epochs 2x", "--epochs: '2x' is not an integer");
  expect_usage_error(kCnn, "--data-format NHWC",
                     "--data-format: 'NHWC' is not one of channels_last, channels_first");
  expect_usage_error(kCnn, "--padding full", "--padding: 'full' is not one of same, valid");
  for (const auto& prog : {kMlp, kRnn, kCnn})
    expect_usage_error(prog, "--threads -1", "--threads: '-1' must be an integer in [0, ");
}

TEST(ExamplesCli, AMalformedThreadCountInTheEnvironmentIsAnError) {
  const Result r = run("KTAPE_NUM_THREADS=two " + kMlp + " --limit 10 --epochs 1");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("KTAPE_NUM_THREADS must be a non-negative integer (0: every core), got "
                       "'two'"),
            std::string::npos)
      << r.err;
}

TEST(ExamplesCli, HelpPrintsTheUsage) {
  for (const auto& prog : {kMlp, kRnn, kCnn}) {
    const Result r = run(prog + " --help");
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("usage:"), std::string::npos) << r.out;
  }
}

TEST(ExamplesCli, BadOutputPathsFailBeforeTraining) {
  for (const std::string flag : {"--save", "--history", "--plot"}) {
    SCOPED_TRACE(flag);
    const Result r = run(kMlp + " --limit 10 --epochs 1 " + flag + " /nonexistent-dir/x.out");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find(flag + ": cannot write '/nonexistent-dir/x.out': directory "
                                "'/nonexistent-dir' does not exist"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("Epoch 1/1"), std::string::npos) << r.out;  // nothing trained
  }
  const Result d = run(kMlp + " --limit 10 --save " + fs::temp_directory_path().string());
  EXPECT_EQ(d.code, 1);
  EXPECT_NE(d.err.find("it is a directory"), std::string::npos) << d.err;
}

TEST(ExamplesCli, CorruptDataIsAMessageAndANonZeroExit) {
  // An image file whose header claims 65536 x 65536 pixels per image over three bytes of data.
  const fs::path dir = fs::temp_directory_path() / ("ktape_cli_data_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write_gz = [&](const std::string& name, const std::vector<unsigned char>& bytes) {
    gzFile f = gzopen((dir / name).c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  };
  write_gz("train-images-idx3-ubyte.gz", {0, 0, 8, 3, 0, 0, 0, 9, 0, 1, 0, 0, 0, 1, 0, 0, 1, 2, 3});
  write_gz("train-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  for (const auto& prog : {kMlp, kRnn, kCnn}) {
    const Result r = run(prog + " --epochs 1 --data-dir " + dir.string());
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("error: IDX file"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("65536x65536"), std::string::npos) << r.err;
  }
  const Result m = run(kMlp + " --data-dir " + (dir / "missing").string());
  EXPECT_EQ(m.code, 1);
  EXPECT_NE(m.err.find("Fashion-MNIST not found"), std::string::npos) << m.err;
  fs::remove_all(dir);
}
