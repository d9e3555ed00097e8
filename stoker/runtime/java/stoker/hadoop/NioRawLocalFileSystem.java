package stoker.hadoop;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system, less its two process forks.
 *
 * Without Hadoop's native library (PySpark ships none), RawLocalFileSystem runs a `chmod`
 * process to set the mode of every file and folder it creates, and a `readlink` process for
 * every link status it reads (a FileContext rename asks for the destination's). Here both
 * are system calls made through java.nio: the same mode, the same answer, no process.
 * Anything java.nio cannot do (a file system without POSIX modes) goes to Hadoop's own code.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    File file = pathToFile(p);
    try {
      Files.setPosixFilePermissions(file.toPath(), modes(permission));
    } catch (UnsupportedOperationException e) {
      super.setPermission(p, permission);
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    File file = pathToFile(f);
    if (!Files.isSymbolicLink(file.toPath())) {
      // Hadoop's answer for a path that is not a link: its status, a missing one's
      // FileNotFoundException, as RawLocalFileSystem gives them once readlink said "".
      return getFileStatus(f);
    }
    return super.getFileLinkStatus(f);
  }

  static Set<PosixFilePermission> modes(FsPermission permission) {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    add(set, permission.getUserAction(), PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(set, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(set, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    return set;
  }

  private static void add(Set<PosixFilePermission> set, FsAction action,
      PosixFilePermission read, PosixFilePermission write, PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      set.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      set.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      set.add(execute);
    }
  }
}
